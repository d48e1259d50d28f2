"""``configure()`` by the OpenTelemetry specification: the resource from the environment and the
arguments, the ``prometheus`` metrics exporter, the scrape endpoint's safe default host and a
port already taken. Each case in a fresh interpreter (see test_configure.py), with the real SDK
and a real HTTP scrape of the real endpoint."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import pytest
from test_configure import _CATCH, file_spans, run_script

import adaptive_runtime as ar

# spans to files under ./t, and what the resource and scope of the first span say
_RESOURCE = '''
    tel = ar.telemetry.configure(directory="t", **KWARGS)
    rt = make_runtime()
    loop(rt, calls=20)
    ar.telemetry.shutdown()
    result(ok=True)
'''


def _resource_of(tmp_path: Path, kwargs: str = "{}", **env: str) -> tuple[dict, str, str]:
    tmp_path.mkdir(exist_ok=True)
    ran = run_script(_RESOURCE.replace("KWARGS", kwargs), tmp_path, **env).ok()
    assert ran.result == {"ok": True}
    span = file_spans(tmp_path / "t" / "traces.jsonl")[0]
    return dict(span.resource_attributes), span.scope_name, span.scope_version


@pytest.mark.parametrize(("kwargs", "env", "name"), [
    ("{}", {}, "adaptive_runtime"),
    ("{'default_service_name': 'script'}", {}, "script"),
    ("{'default_service_name': 'script'}",
     {"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attributes,team=ml"}, "from-attributes"),
    ("{'default_service_name': 'script'}",
     {"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attributes",
      "OTEL_SERVICE_NAME": "from-env"}, "from-env"),
    ("{'service_name': 'code'}", {"OTEL_SERVICE_NAME": "from-env"}, "code"),
], ids=["nothing", "default", "attributes-over-default", "env-over-attributes",
        "argument-over-env"])
def test_the_service_name_follows_the_specifications_precedence(
        tmp_path: Path, kwargs: str, env: dict[str, str], name: str) -> None:
    resource, _scope, _version = _resource_of(tmp_path, kwargs, **env)
    assert resource["service.name"] == name
    if "team=ml" in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        assert resource["team"] == "ml"


def test_each_process_gets_its_own_instance_id_unless_the_environment_names_one(
        tmp_path: Path) -> None:
    first, scope, version = _resource_of(tmp_path / "a")
    second, _scope, _version = _resource_of(tmp_path / "b")
    ids = {first["service.instance.id"], second["service.instance.id"]}
    assert len(ids) == 2, "two runs of one service share an instance id"
    assert all(uuid.UUID(i) for i in ids)
    named, _scope, _version = _resource_of(
        tmp_path / "c", OTEL_RESOURCE_ATTRIBUTES="service.instance.id=rank-0%2Cnode-a")
    assert named["service.instance.id"] == "rank-0,node-a"  # (percent-decoded)
    assert (scope, version) == ("adaptive_runtime", ar.__version__)


@pytest.mark.parametrize(("variables", "named"), [
    ({"OTEL_RESOURCE_ATTRIBUTES": "team=ml,just-a-word"}, "OTEL_RESOURCE_ATTRIBUTES"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "=no-key"}, "OTEL_RESOURCE_ATTRIBUTES"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "team=%ff%fe"}, "OTEL_RESOURCE_ATTRIBUTES"),
    ({"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT": "99999"},
     "OTEL_EXPORTER_PROMETHEUS_PORT"),
    ({"OTEL_TRACES_EXPORTER": "prometheus"}, "OTEL_TRACES_EXPORTER"),
], ids=["pair-without-value", "empty-key", "bad-encoding", "prometheus-port", "traces"])
def test_bad_otel_settings_are_one_error_naming_the_variable_and_install_nothing(
        tmp_path: Path, variables: dict[str, str], named: str) -> None:
    ran = run_script(_CATCH, tmp_path, **variables).ok()
    assert ran.result["error"] is not None and named in ran.result["error"], ran.result
    assert ran.result["tracer"] == "ProxyTracerProvider"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_SCRAPE = '''
    import urllib.request
    tel = ar.telemetry.configure(directory="t")
    rt = make_runtime()
    loop(rt, calls=50)
    port = tel.prometheus_port
    body = ""
    if port is not None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body = r.read().decode()
    host = tel._prometheus_server.server_address[0] if tel._prometheus_server else None
    result(port=port, host=host, metrics=tel.metrics_destination,
           selections="adaptive_selection_total{" in body, traces=tel.traces_destination)
'''


def test_the_prometheus_exporter_serves_a_scrape_endpoint_on_loopback(tmp_path: Path) -> None:
    port = _free_port()
    ran = run_script(_SCRAPE, tmp_path, OTEL_METRICS_EXPORTER="prometheus",
                     OTEL_EXPORTER_PROMETHEUS_PORT=str(port)).ok()
    assert ran.result["port"] == port
    assert ran.result["host"] == "127.0.0.1"  # not every interface of a training node
    assert ran.result["selections"], "the scrape did not return the runtime's metrics"
    assert ran.result["metrics"] is None  # scraped only: no push export
    assert not (tmp_path / "t" / "metrics.jsonl").exists()
    assert (tmp_path / "t" / "traces.jsonl").exists()  # (traces as before: to the files)


def test_a_port_already_taken_is_one_warning_and_the_run_goes_on(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = run_script(_SCRAPE, tmp_path, ADAPTIVE_RUNTIME_PROMETHEUS_PORT=str(port)).ok()
    assert ran.result["port"] is None
    warnings = [line for line in ran.stderr.splitlines() if "Prometheus" in line]
    assert len(warnings) == 1, ran.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in warnings[0]
    assert "ADAPTIVE_RUNTIME_PROMETHEUS_PORT" in warnings[0]
    # the other exporters were installed as usual
    assert ran.result["traces"] and ran.result["metrics"]
    assert (tmp_path / "t" / "traces.jsonl").exists()
