"""``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` and traces-only backends, end to end.

Each case runs ``configure()`` in a fresh interpreter (``python -W error -c SCRIPT``, as in
``test_configure.py``, whose helpers it reuses) against the real OTLP receiver in this process:
the full one, or one that implements traces only, as Jaeger does (gRPC without a
``MetricsService``, HTTP answering 404 on ``/v1/metrics``).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from otlp_receiver import OtlpReceiver
from test_configure import (
    PRELUDE,
    TIMEOUT_S,
    Ran,
    clean_env,
    closed_port,
    has_last_call,
    names,
    run_script,
)

SPAN_WORKER = "adaptive-runtime-spans"  # the runtime's span recorder thread


@pytest.fixture
def traces_only_receiver() -> Iterator[OtlpReceiver]:
    """A real OTLP receiver without a metrics service, as Jaeger is."""
    with OtlpReceiver(signals=("traces",)) as receiver:
        yield receiver


def endpoint_of(receiver: OtlpReceiver, protocol: str) -> str:
    return receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint


def run_in_steps(body: str, cwd: Path, at_ready: Callable[[], None], **env: str) -> Ran:
    """Like ``run_script``, for a script that prints ``READY`` and then waits for a line on
    stdin: ``at_ready()`` runs in between (a test changing the world under the script)."""
    script = PRELUDE + textwrap.dedent(body)
    with subprocess.Popen([sys.executable, "-W", "error", "-c", script], cwd=cwd,
                          env=clean_env(**env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            first = proc.stdout.readline()  # (a script that dies early gives "" here)
            if first.strip() == "READY":
                at_ready()
            stdout, stderr = proc.communicate("go\n", timeout=TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
    return Ran(subprocess.CompletedProcess(proc.args, proc.returncode, first + stdout, stderr))


# ---------------------------------------------------------------------------- traces-only backend


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_traces_only_endpoint_gets_one_line_about_metrics_then_silence(
        tmp_path: Path, traces_only_receiver: OtlpReceiver, protocol: str) -> None:
    receiver = traces_only_receiver
    ran = run_script('''
        import time
        from adaptive_runtime_sdk import providers
        tel = ar.telemetry.configure(metrics_interval_s=0.05)
        rt = make_runtime()
        exporter = providers.installed.metric_exporter
        # run until the periodic reader's first export was refused and export turned off
        deadline = time.monotonic() + 30
        while exporter.target is not None and time.monotonic() < deadline:
            loop(rt, calls=20)
            time.sleep(0.02)
        off = exporter.target is None
        # more intervals with metrics to export: none may reach the endpoint or stderr
        for _ in range(10):
            loop(rt, calls=20)
            time.sleep(0.05)
        loop(rt)
        result(off=off, metrics=tel.metrics_destination)
    ''', tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint_of(receiver, protocol),
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        # Not ours, and not this feature's: with the SDK's OTLP/HTTP exporters (requests +
        # urllib3) a process that exported over HTTP more than once leaves one pooled
        # connection's socket unclosed until exit (seen with the full receiver and before
        # this feature too); ResourceWarning is ignored for that transport only.
        warning_options=("error", "ignore::ResourceWarning") if protocol != "grpc"
        else ("error",))
    ran.ok()
    assert ran.result["off"] is True, f"metric export was never switched off: {ran}"
    # traces keep flowing, up to the last call before exit
    spans = receiver.wait_for_spans(has_last_call, timeout_s=10.0)
    assert {"adaptive.select scale", "adaptive.execute scale"} <= names(spans)
    # one attempt at metrics, refused; none after it (nor at the exit's final flush)
    refused = receiver.requests("metrics")
    assert [r.status for r in refused] == ["UNIMPLEMENTED"], refused
    reason = "UNIMPLEMENTED" if protocol == "grpc" else "HTTP 404"
    where = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_metrics_url
    assert ran.result["metrics"] == where
    assert ran.stderr.splitlines() == [
        f"adaptive_runtime: {where} does not accept OTLP metrics ({reason}: a traces-only "
        "backend such as Jaeger); metrics export is off. Send metrics to an OpenTelemetry "
        "Collector, or set OTEL_METRICS_EXPORTER=none"], ran


def test_a_traces_only_endpoint_does_not_silence_a_later_span_outage(
        tmp_path: Path, traces_only_receiver: OtlpReceiver) -> None:
    """The refused metrics are not an outage: when the traces endpoint then goes down, that
    outage still gets its one warning."""
    receiver = traces_only_receiver
    ran = run_in_steps('''
        import time
        from adaptive_runtime_sdk import providers
        tel = ar.telemetry.configure(metrics_interval_s=0.05)
        rt = make_runtime()
        exporter = providers.installed.metric_exporter
        deadline = time.monotonic() + 30
        while exporter.target is not None and time.monotonic() < deadline:
            loop(rt, calls=20)
            time.sleep(0.02)
        rt.flush_telemetry()
        tel.tracer_provider.force_flush(10_000)  # the spans so far reach the receiver
        print("READY", flush=True)
        sys.stdin.readline()  # the test stops the receiver
        for size in range(1, 60):  # first calls: spans that are always admitted
            rt.run("scale", size)
        rt.flush_telemetry()
        tel.tracer_provider.force_flush(10_000)
        result(lost=tel.spans_lost)
    ''', tmp_path, receiver.stop,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.grpc_endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_TIMEOUT="1",
        GRPC_VERBOSITY="ERROR")  # (grpc's C core logs the receiver's GOAWAY as info on stderr)
    ran.ok()
    assert ran.result["lost"] > 0, ran
    assert receiver.spans(), "no span reached the receiver before it stopped"
    lines = ran.stderr.splitlines()
    assert len(lines) == 3, ran
    assert "does not accept OTLP metrics" in lines[0], ran
    assert "traces" in lines[1] and "UNAVAILABLE" in lines[1], ran
    assert "telemetry shutdown after" in lines[2] and "spans" in lines[2], ran  # at exit


# ---------------------------------------------------------------------------- choosing exporters


@pytest.mark.parametrize("traces", [None, "none"])
def test_traces_exporter_none_records_no_spans_and_runs_no_span_worker(
        tmp_path: Path, otlp_receiver: OtlpReceiver, traces: str | None) -> None:
    ran = run_script(f'''
        import threading
        from opentelemetry import trace
        before = make_runtime()  # attached by configure()
        tel = ar.telemetry.configure(metrics_interval_s=0.05)
        after = make_runtime()  # attached when made
        loop(before)
        loop(after)
        result(recording=[rt.stats().recording_spans for rt in (before, after)],
               worker={SPAN_WORKER!r} in [t.name for t in threading.enumerate()],
               traces=tel.traces_destination, tracer_provider=tel.tracer_provider is not None,
               global_provider=type(trace.get_tracer_provider()).__name__)
    ''', tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=otlp_receiver.grpc_endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        **({"OTEL_TRACES_EXPORTER": traces} if traces else {}))
    ran.ok()
    assert ran.stderr == "", ran
    # metrics go out either way (at the latest, the exit's final flush)
    assert otlp_receiver.metrics("adaptive.selection"), otlp_receiver.requests()
    if traces is None:  # the default: an endpoint, so OTLP
        assert ran.result == {"recording": [True, True], "worker": True,
                              "traces": otlp_receiver.grpc_endpoint, "tracer_provider": True,
                              "global_provider": "TracerProvider"}
        otlp_receiver.wait_for_spans(has_last_call, timeout_s=10.0)
    else:
        assert ran.result == {"recording": [False, False], "worker": False, "traces": None,
                              "tracer_provider": False, "global_provider": "ProxyTracerProvider"}
        assert otlp_receiver.requests("traces") == []


def test_metrics_exporter_none_exports_no_metrics_and_traces_still_flow(
        tmp_path: Path, otlp_receiver: OtlpReceiver) -> None:
    ran = run_script('''
        from opentelemetry import metrics
        tel = ar.telemetry.configure(metrics_interval_s=0.05)
        rt = make_runtime()
        loop(rt)
        result(metrics=tel.metrics_destination, meter_provider=tel.meter_provider is not None,
               global_provider=type(metrics.get_meter_provider()).__name__)
    ''', tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=otlp_receiver.grpc_endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc", OTEL_METRICS_EXPORTER="none")
    ran.ok()
    assert ran.stderr == "", ran
    assert ran.result == {"metrics": None, "meter_provider": False,
                          "global_provider": "_ProxyMeterProvider"}
    otlp_receiver.wait_for_spans(has_last_call, timeout_s=10.0)
    assert otlp_receiver.requests("metrics") == []


def test_console_prints_spans_on_stdout_and_the_other_signal_keeps_its_endpoint(
        tmp_path: Path, otlp_receiver: OtlpReceiver) -> None:
    ran = run_script('''
        tel = ar.telemetry.configure()
        rt = make_runtime()
        loop(rt, calls=50)
        result(traces=tel.traces_destination, metrics=tel.metrics_destination)
    ''', tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=otlp_receiver.grpc_endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc", OTEL_TRACES_EXPORTER="console")
    ran.ok()
    assert ran.result == {"traces": "stdout", "metrics": otlp_receiver.grpc_endpoint}
    # (spans are printed at exit, after the RESULT line)
    assert '"name": "adaptive.select scale"' in ran.stdout, ran
    assert '"name": "adaptive.execute scale"' in ran.stdout, ran
    assert otlp_receiver.requests("traces") == []
    assert otlp_receiver.metrics("adaptive.selection")
    assert not (tmp_path / "adaptive-runtime-telemetry").exists()


def test_console_metrics_are_printed_on_stdout(tmp_path: Path) -> None:
    ran = run_script('''
        tel = ar.telemetry.configure(metrics_exporter="console", traces_exporter="none")
        loop(make_runtime(), calls=50)
        result(metrics=tel.metrics_destination)
    ''', tmp_path)
    ran.ok()
    assert ran.result == {"metrics": "stdout"}
    assert '"name": "adaptive.selection"' in ran.stdout, ran
    assert not (tmp_path / "adaptive-runtime-telemetry").exists()


@pytest.mark.parametrize(("protocol", "traces", "metrics"), [
    ("http/protobuf", "http://localhost:4318/v1/traces", "http://localhost:4318/v1/metrics"),
    ("grpc", "http://localhost:4317", "http://localhost:4317"),
])
def test_otlp_without_an_endpoint_uses_the_specification_default(
        tmp_path: Path, protocol: str, traces: str, metrics: str) -> None:
    ran = run_script('''
        tel = ar.telemetry.configure()
        result(traces=tel.traces_destination, metrics=tel.metrics_destination)
        ar.telemetry.shutdown(timeout_s=1.0)  # nothing recorded: nothing to send
    ''', tmp_path, OTEL_TRACES_EXPORTER="otlp", OTEL_METRICS_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
    assert ran.returncode == 0, ran
    assert ran.result == {"traces": traces, "metrics": metrics}, ran
    assert not (tmp_path / "adaptive-runtime-telemetry").exists(), "the files were written"


# ---------------------------------------------------------------------------- bad values


_CATCH = '''
    from opentelemetry import metrics, trace
    try:
        ar.telemetry.configure(directory="unused", **{kwargs})
    except ar.ConfigError as exc:
        result(error=str(exc), tracer=type(trace.get_tracer_provider()).__name__,
               meter=type(metrics.get_meter_provider()).__name__)
    else:
        result(error=None)
'''


@pytest.mark.parametrize(("variables", "kwargs", "named"), [
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, {}, "OTEL_TRACES_EXPORTER"),
    ({"OTEL_TRACES_EXPORTER": "prometheus"}, {}, "OTEL_TRACES_EXPORTER"),
    ({"OTEL_TRACES_EXPORTER": "otlp,console"}, {}, "OTEL_TRACES_EXPORTER"),
    ({}, {"metrics_exporter": "jaeger"}, "metrics_exporter='jaeger'"),
], ids=["traces", "traces-prometheus", "list", "argument"])
def test_an_unknown_exporter_is_a_config_error_naming_it_and_sets_nothing_up(
        tmp_path: Path, variables: dict[str, str], kwargs: dict[str, str], named: str) -> None:
    ran = run_script(_CATCH.format(kwargs=kwargs), tmp_path,
                     OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port()}", **variables)
    ran.ok()
    error = ran.result["error"]
    assert error is not None, f"configure() accepted {variables or kwargs}"
    assert named in error
    assert all(value in error for value in ("otlp", "console", "none")), error
    if "," in variables.get("OTEL_TRACES_EXPORTER", ""):
        assert "one exporter per signal" in error, error
    else:
        assert "single value" in error, error
    if variables.get("OTEL_TRACES_EXPORTER") == "prometheus":
        assert "OTEL_METRICS_EXPORTER=prometheus" in error, "no hint at the metrics exporter"
    assert (ran.result["tracer"], ran.result["meter"]) == (
        "ProxyTracerProvider", "_ProxyMeterProvider"), "configure() raised after installing"
