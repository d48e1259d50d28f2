"""``ar.telemetry.configure()`` end to end, each case in a fresh interpreter.

``configure()`` installs the *global* OpenTelemetry providers, which the OTel API lets a process
set only once, so every case runs as a subprocess (``python -W error -c SCRIPT``, bounded by a
timeout) and the test asserts on what came out of it: the exit code and stderr, the OTLP/JSON
files it wrote, or what the real OTLP receiver (``otlp_receiver`` fixture, in this process)
received. Scripts deliberately do not call ``shutdown()`` unless a case is about it: what
they export must get out at interpreter exit.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import child_run
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from otlp_receiver import OtlpReceiver, ReceivedSpan, flatten_spans

from adaptive_runtime.offline.report.otlp_files import decode_requests

TIMEOUT_S = 60

# What every script starts with: a runtime with one two-arm op, and a loop over it. The last
# call of ``loop`` is a new key (a first call, always exported), right before the script ends,
# so it is still in the span buffer at exit unless something flushed it.
PRELUDE = textwrap.dedent('''
    import json, os, sys
    import adaptive_runtime as ar
    from adaptive_runtime.operations import DeviceProbe

    def make_runtime():
        rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False,
                                devices=DeviceProbe(gpu=False))
        op = rt.register("scale", size=lambda n: n, kind="vector")
        op.add_implementation("simd", lambda n: 2 * n)
        op.add_implementation("scalar", lambda n: n + n)
        return rt

    LAST_SIZE = 777_777

    def loop(rt, calls=300, size=1000):
        for _ in range(calls):
            assert rt.run("scale", size) == 2 * size
        assert rt.run("scale", LAST_SIZE) == 2 * LAST_SIZE

    def result(**values):
        print("RESULT " + json.dumps(values), flush=True)
''')
LAST_SIZE = 777_777


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any OTEL_* / ADAPTIVE_RUNTIME_* setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "ADAPTIVE_RUNTIME_"))}
    env.update(OTEL_BSP_SCHEDULE_DELAY="50", OTEL_EXPORTER_OTLP_TIMEOUT="2",
               PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


class Ran(child_run.Ran):
    def ok(self) -> Ran:
        assert self.returncode == 0, self
        assert "Traceback" not in self.stderr, self
        assert self.result, self
        return self


def run_script(body: str, cwd: Path, *, warning_options: tuple[str, ...] = ("error",),
               **env: str) -> Ran:
    script = PRELUDE + textwrap.dedent(body)
    options = [arg for option in warning_options for arg in ("-W", option)]
    proc = subprocess.run([sys.executable, *options, "-c", script], cwd=cwd,
                          env=clean_env(**env), capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
    return Ran(proc)


def file_spans(path: Path) -> list[ReceivedSpan]:
    return [s for request in decode_requests(path, ExportTraceServiceRequest)
            for s in flatten_spans(request)]


def names(spans: list[ReceivedSpan]) -> set[str]:
    return {s.name for s in spans}


def has_last_call(spans: list[ReceivedSpan]) -> bool:
    return any(s.name == "adaptive.select scale"
               and s.attributes.get("adaptive.input_size") == LAST_SIZE for s in spans)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------- embedded default


@pytest.mark.parametrize(("where", "order"), [
    ("argument", "runtime-first"),
    ("argument", "configure-first"),
    ("env", "configure-first"),
    ("cwd", "configure-first"),
])
def test_without_an_endpoint_spans_and_metrics_go_to_otlp_json_files_at_exit(
        tmp_path: Path, where: str, order: str) -> None:
    folder = {"argument": tmp_path / "arg-dir", "env": tmp_path / "env-dir",
              "cwd": tmp_path / "adaptive-runtime-telemetry"}[where]
    ran = run_script(f'''
        kwargs = {{"directory": {str(folder)!r}}} if {where!r} == "argument" else {{}}
        if {order!r} == "runtime-first":
            rt = make_runtime()
        tel = ar.telemetry.configure(service_name="cfg-files", **kwargs)
        if {order!r} == "configure-first":
            rt = make_runtime()
        loop(rt)
        result(enabled=tel.enabled, traces=tel.traces_destination,
               metrics=tel.metrics_destination)
        # no shutdown(): interpreter exit must write everything
    ''', tmp_path, **({"ADAPTIVE_RUNTIME_TELEMETRY_DIR": str(folder)} if where == "env" else {}))
    ran.ok()
    assert ran.result["enabled"] is True
    traces, metrics = folder / "traces.jsonl", folder / "metrics.jsonl"
    assert Path(tmp_path, ran.result["traces"]).resolve() == traces.resolve()
    assert Path(tmp_path, ran.result["metrics"]).resolve() == metrics.resolve()
    spans = file_spans(traces)
    assert {"adaptive.select scale", "adaptive.execute scale"} <= names(spans)
    assert len([s for s in spans if s.name == "adaptive.select scale"]) == len(
        [s for s in spans if s.name == "adaptive.execute scale"])
    assert all(s.resource_attributes["service.name"] == "cfg-files" for s in spans)
    assert has_last_call(spans), "the spans of the last call before exit were lost"
    assert metrics.exists(), f"no metrics file after exit; files: {os.listdir(folder)}"


def test_a_run_shorter_than_the_metric_interval_exports_every_gauge_at_exit(
        tmp_path: Path) -> None:
    """The demo, a quick experiment: the one export there is, at exit, carries every
    instrument with a value — the learned-state gauges too, read as the runtime's metrics
    closed (before the provider's last collection)."""
    folder = tmp_path / "telemetry"
    ran = run_script(f'''
        import numpy as np
        ar.telemetry.configure(directory={str(folder)!r})
        x = np.linspace(-1.0, 1.0, 4096)
        for _ in range(200):
            ar.ops.relu(x)
        result(done=True)
    ''', tmp_path)
    ran.ok()
    requests = decode_requests(folder / "metrics.jsonl", ExportMetricsServiceRequest)
    assert len(requests) == 1, "a run under the 10 s interval exports once, at exit"
    exported = {m.name for rm in requests[-1].resource_metrics for sm in rm.scope_metrics
                for m in sm.metrics}
    assert {"adaptive.selection", "adaptive.op.duration", "adaptive.committed",
            "adaptive.learned.latency", "adaptive.hot_path.active",
            "adaptive.quarantined"} <= exported, sorted(exported)


# ---------------------------------------------------------------------------- OTLP from OTEL_*


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_otlp_settings_from_the_environment_reach_the_receiver(
        tmp_path: Path, otlp_receiver: OtlpReceiver, protocol: str) -> None:
    endpoint = (otlp_receiver.grpc_endpoint if protocol == "grpc"
                else otlp_receiver.http_endpoint)
    ran = run_script('''
        tel = ar.telemetry.configure()
        rt = make_runtime()
        loop(rt)
        result(traces=tel.traces_destination, metrics=tel.metrics_destination)
    ''', tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        OTEL_SERVICE_NAME="cfg-otlp",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment=test,team=perf",
        OTEL_EXPORTER_OTLP_HEADERS="x-api-key=secret")
    ran.ok()
    if protocol == "grpc":
        assert ran.result["traces"] == endpoint
    else:
        assert ran.result["traces"] == otlp_receiver.http_traces_url
        assert ran.result["metrics"] == otlp_receiver.http_metrics_url
    spans = otlp_receiver.wait_for_spans(has_last_call, timeout_s=10.0)
    assert {"adaptive.select scale", "adaptive.execute scale"} <= names(spans)
    for span in spans:
        assert span.resource_attributes["service.name"] == "cfg-otlp"
        assert span.resource_attributes["deployment.environment"] == "test"
        assert span.resource_attributes["team"] == "perf"
    requests = otlp_receiver.requests()
    assert requests
    transport = "grpc" if protocol == "grpc" else "http"
    for request in requests:
        assert request.transport == transport, request
        assert request.headers.get("x-api-key") == "secret", request
        assert request.accepted, request
    assert not (tmp_path / "adaptive-runtime-telemetry").exists(), "files written as well"


def test_otel_sdk_disabled_exports_nothing_and_the_loop_still_runs(
        tmp_path: Path, otlp_receiver: OtlpReceiver) -> None:
    folder = tmp_path / "telemetry"
    ran = run_script(f'''
        from opentelemetry import trace
        tel = ar.telemetry.configure(directory={str(folder)!r})
        rt = make_runtime()
        loop(rt)
        result(enabled=tel.enabled, tracer_provider=tel.tracer_provider is None,
               attached=rt.stats().recording_spans,
               global_provider=type(trace.get_tracer_provider()).__name__)
    ''', tmp_path, OTEL_SDK_DISABLED="true",
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp_receiver.http_endpoint)
    ran.ok()
    assert ran.result == {"enabled": False, "tracer_provider": True, "attached": False,
                          "global_provider": "ProxyTracerProvider"}
    assert not folder.exists()
    assert not (tmp_path / "adaptive-runtime-telemetry").exists()
    assert otlp_receiver.request_count == 0


def test_an_application_provider_set_before_configure_is_kept(
        tmp_path: Path, otlp_receiver: OtlpReceiver) -> None:
    folder = tmp_path / "telemetry"
    ran = run_script(f'''
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        app = TracerProvider(resource=Resource.create({{"service.name": "my-app"}}))
        app.add_span_processor(SimpleSpanProcessor(
            OTLPSpanExporter(endpoint={otlp_receiver.http_traces_url!r})))
        trace.set_tracer_provider(app)
        tel = ar.telemetry.configure(directory={str(folder)!r})
        rt = make_runtime()
        with app.get_tracer("app").start_as_current_span("train_step"):
            loop(rt, calls=50)
        result(tracer_provider_is_none=tel.tracer_provider is None,
               global_is_app=trace.get_tracer_provider() is app,
               traces=tel.traces_destination)
    ''', tmp_path, warning_options=("error", "ignore::ResourceWarning"))
    # (the app's own HTTP exporter leaves a pooled socket to the GC at exit: not ours)
    ran.ok()
    assert ran.result == {"tracer_provider_is_none": True, "global_is_app": True,
                          "traces": None}
    spans = otlp_receiver.wait_for_spans(has_last_call, timeout_s=10.0)
    step = otlp_receiver.span("train_step")
    ours = [s for s in spans if s.name.startswith("adaptive.")]
    assert {"adaptive.select scale", "adaptive.execute scale"} <= names(ours)
    for span in ours:
        assert span.resource_attributes["service.name"] == "my-app"
        assert span.parent_span_id == step.span_id
    assert not (folder / "traces.jsonl").exists(), "configure() exported spans of its own"


# ---------------------------------------------------------------------------- bad settings


_CATCH = '''
    from opentelemetry import trace
    try:
        ar.telemetry.configure(directory="unused")
    except ar.ConfigError as exc:
        result(error=str(exc), tracer=type(trace.get_tracer_provider()).__name__)
    else:
        result(error=None)
'''


@pytest.mark.parametrize(("variables", "named"), [
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
    ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "carrier-pigeon"},
     "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
    ({"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "carrier-pigeon"},
     "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"),
    ({"ADAPTIVE_RUNTIME_PROMETHEUS_PORT": "not-a-port"}, "ADAPTIVE_RUNTIME_PROMETHEUS_PORT"),
    ({"ADAPTIVE_RUNTIME_PROMETHEUS_PORT": "70000"}, "ADAPTIVE_RUNTIME_PROMETHEUS_PORT"),
], ids=["protocol", "traces-protocol", "metrics-protocol", "port-text", "port-range"])
def test_a_bad_setting_is_a_config_error_naming_it_and_sets_nothing_up(
        tmp_path: Path, variables: dict[str, str], named: str) -> None:
    ran = run_script(_CATCH, tmp_path,
                     OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port()}", **variables)
    ran.ok()
    error = ran.result["error"]
    assert error is not None, "configure() accepted a bad setting"
    assert named in error
    if "PROTOCOL" in named:
        assert "grpc" in error and "http/protobuf" in error, "the accepted values are named"
    else:
        assert "65535" in error, "the accepted range is named"
    # validated before anything global was installed
    assert ran.result["tracer"] == "ProxyTracerProvider", (
        "configure() raised after installing a global tracer provider")


def test_a_bad_protocol_is_an_error_even_without_an_endpoint(tmp_path: Path) -> None:
    """docs/configuration.md: a bad value is a clear error naming the variable, never ignored."""
    ran = run_script(_CATCH, tmp_path, OTEL_EXPORTER_OTLP_PROTOCOL="carrier-pigeon")
    ran.ok()
    assert ran.result["error"] is not None, (
        "OTEL_EXPORTER_OTLP_PROTOCOL=carrier-pigeon was silently ignored (no endpoint set)")
    assert "OTEL_EXPORTER_OTLP_PROTOCOL" in ran.result["error"]


# ---------------------------------------------------------------------------- collector down


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_collector_that_is_down_never_breaks_the_loop_or_the_exit(
        tmp_path: Path, protocol: str) -> None:
    ran = run_script('''
        tel = ar.telemetry.configure()
        rt = make_runtime()
        loop(rt, calls=3000)
        for batch in range(3):  # three export attempts, each failing
            for size in range(21):  # a stream of first calls: many admitted spans
                rt.run("scale", 1 << (size + 21 * batch))  # (sizes stay below 2**64)
            rt.flush_telemetry()
            tel.tracer_provider.force_flush(10_000)
        result(done=True, traces=tel.traces_destination, lost=tel.spans_lost)
    ''', tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port()}",
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol, OTEL_EXPORTER_OTLP_TIMEOUT="1")
    assert ran.returncode == 0, ran
    assert ran.result.get("done") is True, ran
    assert "Traceback" not in ran.stderr, ran
    assert not (tmp_path / "adaptive-runtime-telemetry").exists()
    # every failed batch is counted; the outage is logged once, not once per batch, and the
    # shutdown at exit says in one more line what was not sent
    assert ran.result["lost"] >= 3 * 2 * 21, ran
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 2 and "telemetry shutdown after" in lines[1], ran


# ---------------------------------------------------------------------------- lifecycle


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_configure_again_warns_returns_the_first_handle_and_spans_still_reach_the_first(
        tmp_path: Path, otlp_receiver: OtlpReceiver, protocol: str) -> None:
    """Set once, as OpenTelemetry's providers are: the default path (``configure()`` from
    the environment, twice) warns once, returns the same handle, installs nothing new, and
    the spans made after the second call, the application's own included, reach the first
    configuration's collector."""
    endpoint = (otlp_receiver.grpc_endpoint if protocol == "grpc"
                else otlp_receiver.http_endpoint)
    second = tmp_path / "second"
    ran = run_script(f'''
        import warnings
        from opentelemetry import trace
        from adaptive_runtime.config import ConfigWarning
        first = ar.telemetry.configure()
        provider = trace.get_tracer_provider()
        rt = make_runtime()
        loop(rt, calls=50, size=100)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            again = ar.telemetry.configure(directory={str(second)!r},
                                           traces_exporter="console")
        with trace.get_tracer("app").start_as_current_span("train_step"):
            loop(rt, calls=50)
        result(same=again is first, same_provider=trace.get_tracer_provider() is provider,
               warnings=[(w.category.__name__, str(w.message)) for w in caught],
               traces=again.traces_destination)
    ''', tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
    ran.ok()
    assert ran.result["same"] is True, "the second configure() returned another handle"
    assert ran.result["same_provider"] is True, "the second configure() installed a provider"
    assert [category for category, _ in ran.result["warnings"]] == ["ConfigWarning"], ran
    message = ran.result["warnings"][0][1]
    assert "set once" in message and "first configuration stays" in message, message
    assert ran.result["traces"] != str(second / "traces.jsonl")
    spans = otlp_receiver.wait_for_spans(has_last_call, timeout_s=10.0)
    step = otlp_receiver.span("train_step")
    sizes = {s.attributes.get("adaptive.input_size") for s in spans}
    assert {100, 1000} <= sizes, "spans made before or after the second call were lost"
    assert any(s.parent_span_id == step.span_id for s in spans), (
        "the runtime's spans are not parented under the application's span")
    assert not second.exists(), "the second configure() wrote files of its own"
    assert "adaptive.select" not in ran.stdout, (
        "the second configure()'s console exporter printed spans")


def test_configure_after_shutdown_warns_and_telemetry_stays_off(tmp_path: Path) -> None:
    folder, second = tmp_path / "telemetry", tmp_path / "second"
    ran = run_script(f'''
        import warnings
        from adaptive_runtime.config import ConfigWarning
        first = ar.telemetry.configure(directory={str(folder)!r})
        rt = make_runtime()
        loop(rt, calls=50)
        ar.telemetry.shutdown()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            again = ar.telemetry.configure(directory={str(second)!r})
        loop(rt, calls=50, size=5)
        result(same=again is first, attached=rt.stats().recording_spans,
               warnings=[str(w.message) for w in caught if w.category is ConfigWarning])
    ''', tmp_path)
    ran.ok()
    assert ran.result["same"] is True
    assert ran.result["attached"] is False, "configure() after shutdown() switched spans on"
    assert len(ran.result["warnings"]) == 1 and "shut down" in ran.result["warnings"][0], ran
    assert not second.exists()
    assert 5 not in {s.attributes.get("adaptive.input_size")
                     for s in file_spans(folder / "traces.jsonl")}


def test_a_runtime_instrumented_before_configure_still_flushes_at_exit(tmp_path: Path) -> None:
    folder = tmp_path / "telemetry"
    ran = run_script(f'''
        rt = make_runtime()
        ar.telemetry.instrument(rt)  # explicit opt-in, before any SDK exists
        ar.telemetry.configure(directory={str(folder)!r})
        loop(rt)
        result(done=True)
    ''', tmp_path)
    ran.ok()
    traces = folder / "traces.jsonl"
    spans = file_spans(traces) if traces.exists() else []
    assert has_last_call(spans), (
        "the last call's spans were lost at exit: the recorder was made before the provider, "
        "so its atexit flush ran after the provider's own atexit shutdown")


def test_explicit_shutdown_then_more_calls_and_exit_are_quiet(tmp_path: Path) -> None:
    folder = tmp_path / "telemetry"
    ran = run_script(f'''
        tel = ar.telemetry.configure(directory={str(folder)!r})
        rt = make_runtime()
        loop(rt, calls=50)
        ar.telemetry.shutdown()
        ar.telemetry.shutdown()  # idempotent
        loop(rt, calls=50, size=5)  # telemetry is off now; the loop goes on
        result(attached=rt.stats().recording_spans)
    ''', tmp_path)
    ran.ok()
    assert ran.result == {"attached": False}
    spans = file_spans(folder / "traces.jsonl")
    assert has_last_call(spans)
    assert 5 not in {s.attributes.get("adaptive.input_size") for s in spans}


def test_exit_after_configure_logs_nothing(tmp_path: Path) -> None:
    """A clean run leaves stderr empty: shutting the providers down twice (the SDK's own
    atexit handler, then configure()'s) logs "shutdown can only be called once"."""
    ran = run_script(f'''
        ar.telemetry.configure(directory={str(tmp_path / "telemetry")!r})
        loop(make_runtime())
        result(done=True)
    ''', tmp_path)
    ran.ok()
    assert ran.stderr == "", ran
