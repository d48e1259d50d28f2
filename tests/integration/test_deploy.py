"""The viewing stack (docker-compose.yml and deploy/), checked without starting a container.

What can run here runs for real: Debian's ``docker-compose`` (v1; ``config`` needs no Docker
engine) validates and normalises the compose file, and ``promtool`` checks the Prometheus
config. No Collector, Jaeger or Grafana binary exists here, so their configs are parsed and
checked structurally: every pipeline refers only to components the file defines, every defined
component is used, connectors join an exporting and a receiving pipeline of the right signals,
and the files agree with each other (ports, host names, uids, metric names).

``make test`` installs both tools (Debian packages ``docker-compose`` and ``prometheus``):
without them these tests are skipped, or fail where the ``CI`` environment variable is set.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from required import require_binary

from adaptive_runtime_sdk.prometheus import EXEMPLAR_TRACE_LABEL

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DEPLOY = ROOT / "deploy"
COLLECTOR_CONFIG = DEPLOY / "otel-collector.yaml"
JAEGER_CONFIG = DEPLOY / "jaeger.yaml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus.yml"
GRAFANA_PROVISIONING = DEPLOY / "grafana" / "provisioning"

SERVICES = {"jaeger", "otel-collector", "prometheus", "grafana"}
# Services without a compose health check, and why (kept honest by a test: listed ones must
# indeed have none).
NO_HEALTHCHECK = {
    "otel-collector": "otel/opentelemetry-collector-contrib is FROM scratch: no shell, wget or "
                      "curl to probe with, and the binary has no probe command; its "
                      "health_check extension is published on 127.0.0.1:13133 instead",
}
# Connector types whose signals are known: (signal it exports from, signal it receives into).
CONNECTOR_SIGNALS = {"spanmetrics": ("traces", "metrics")}
SIGNALS = ("traces", "metrics", "logs")

# Variables that would change what `docker-compose config` renders (from the developer's shell).
_COMPOSE_VARIABLES = ("GRAFANA_ADMIN_USER", "GRAFANA_ADMIN_PASSWORD",
                      "ADAPTIVE_RUNTIME_TELEMETRY_DIR")


# ---------------------------------------------------------------------------- tools and files

def _tool(name: str, package: str) -> str:
    return require_binary(name, package)


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          **kwargs)


def parse_yaml(text: str) -> Any:
    return yaml.safe_load(text)


@functools.cache
def _load_cached(path: Path) -> str:
    return json.dumps(parse_yaml(path.read_text()))


def load(path: Path) -> Any:
    """A YAML file of the repository, parsed (a fresh copy per call)."""
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing"
    return json.loads(_load_cached(path))


@functools.cache
def _compose_config_output() -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _COMPOSE_VARIABLES}
    result = _run([_tool("docker-compose", "docker-compose"), "-f", str(COMPOSE_FILE),
                   "config"], cwd=ROOT, env=env)
    return result.returncode, result.stdout, result.stderr


@functools.cache
def _compose_config_parsed() -> str:
    rc, out, err = _compose_config_output()
    assert rc == 0, f"docker-compose config failed ({rc}):\n{err}"
    return json.dumps(parse_yaml(out))


def compose_config() -> dict[str, Any]:
    """docker-compose.yml as `docker-compose config` resolves it (defaults substituted)."""
    return json.loads(_compose_config_parsed())


def raw_compose() -> dict[str, Any]:
    """docker-compose.yml as written (variables not substituted)."""
    return load(COMPOSE_FILE)


def service(name: str) -> dict[str, Any]:
    return compose_config()["services"][name]


def _port(endpoint: str) -> int:
    """The port of ``host:port`` or a URL."""
    if "//" in endpoint:
        port = urlsplit(endpoint).port
        assert port is not None, endpoint
        return port
    return int(endpoint.rsplit(":", 1)[1])


def _host(endpoint: str) -> str:
    if "//" in endpoint:
        return urlsplit(endpoint).hostname or ""
    return endpoint.rsplit(":", 1)[0]


def _published(name: str) -> dict[int, tuple[str, int]]:
    """container port -> (host ip, host port) of a service's published ports."""
    published = {}
    for spec in service(name).get("ports", []):
        match = re.fullmatch(r"(?:(?P<ip>[0-9.]+):)?(?P<host>\d+):(?P<container>\d+)(?:/tcp)?",
                             str(spec))
        assert match, f"{name}: unexpected port spec {spec!r}"
        published[int(match["container"])] = (match["ip"] or "", int(match["host"]))
    return published


def _mounts(name: str) -> list[tuple[str, str, str]]:
    """(source, target, mode) of a service's volumes, as `docker-compose config` renders them."""
    mounts = []
    for spec in service(name).get("volumes", []):
        source, target, *mode = str(spec).split(":")
        mounts.append((source, target, mode[0] if mode else "rw"))
    return mounts


# ---------------------------------------------------------------------------- pipelines

def pipeline_problems(config: dict[str, Any]) -> list[str]:
    """What is wrong with a Collector-style config's wiring (Collector contrib, Jaeger v2)."""
    problems: list[str] = []
    defined = {kind: set((config.get(kind) or {}).keys())
               for kind in ("receivers", "processors", "exporters", "connectors", "extensions")}
    service_section = config.get("service") or {}
    pipelines = service_section.get("pipelines") or {}
    if not pipelines:
        problems.append("service.pipelines is empty")
    used: dict[str, set[str]] = {kind: set() for kind in defined}
    connector_sides: dict[str, dict[str, set[str]]] = {
        c: {"exporter": set(), "receiver": set()} for c in defined["connectors"]}

    for pipeline_id, pipeline in pipelines.items():
        signal = pipeline_id.split("/", 1)[0]
        if signal not in SIGNALS:
            problems.append(f"pipeline {pipeline_id}: unknown signal {signal!r}")
        pipeline = pipeline or {}
        for role, kind in (("receivers", "receivers"), ("processors", "processors"),
                           ("exporters", "exporters")):
            ids = pipeline.get(role) or []
            if role != "processors" and not ids:
                problems.append(f"pipeline {pipeline_id}: no {role}")
            if len(ids) != len(set(ids)):
                problems.append(f"pipeline {pipeline_id}: {role} listed twice: {ids}")
            for component in ids:
                if component in defined[kind]:
                    used[kind].add(component)
                elif role != "processors" and component in defined["connectors"]:
                    side = "exporter" if role == "exporters" else "receiver"
                    connector_sides[component][side].add(signal)
                else:
                    problems.append(f"pipeline {pipeline_id}: {role[:-1]} {component!r} is "
                                    f"not defined")

    for kind in ("receivers", "processors", "exporters"):
        for component in sorted(defined[kind] - used[kind]):
            problems.append(f"{kind[:-1]} {component!r} is defined but in no pipeline")
    for connector, sides in sorted(connector_sides.items()):
        if not sides["exporter"] or not sides["receiver"]:
            problems.append(f"connector {connector!r} must be an exporter in one pipeline and a "
                            f"receiver in another (exporter in {sorted(sides['exporter'])}, "
                            f"receiver in {sorted(sides['receiver'])})")
            continue
        expected = CONNECTOR_SIGNALS.get(connector.split("/", 1)[0])
        if expected and (expected[0] not in sides["exporter"]
                         or expected[1] not in sides["receiver"]):
            problems.append(f"connector {connector!r} goes {expected[0]} -> {expected[1]}, but "
                            f"is fed by {sorted(sides['exporter'])} and feeds "
                            f"{sorted(sides['receiver'])}")

    listed = service_section.get("extensions") or []
    for extension in listed:
        if extension not in defined["extensions"]:
            problems.append(f"service.extensions lists {extension!r}, which is not defined")
    for extension in sorted(defined["extensions"] - set(listed)):
        problems.append(f"extension {extension!r} is defined but not in service.extensions")
    return problems


def _pipelines_with(config: dict[str, Any], role: str, component: str) -> list[str]:
    return [pid for pid, p in config["service"]["pipelines"].items()
            if component in (p.get(role) or [])]


def test_pipeline_checker_finds_each_kind_of_miswiring() -> None:
    good: dict[str, Any] = {
        "receivers": {"otlp": {}},
        "processors": {"batch": {}},
        "exporters": {"otlp_grpc/x": {}, "prometheus": {}},
        "connectors": {"spanmetrics": {}},
        "extensions": {"health_check": {}},
        "service": {
            "extensions": ["health_check"],
            "pipelines": {
                "traces": {"receivers": ["otlp"], "processors": ["batch"],
                           "exporters": ["otlp_grpc/x", "spanmetrics"]},
                "metrics": {"receivers": ["spanmetrics"], "exporters": ["prometheus"]},
            },
        },
    }
    assert pipeline_problems(good) == []

    def broken(edit: Callable[[dict[str, Any], dict[str, Any]], object]) -> list[str]:
        config = json.loads(json.dumps(good))
        edit(config, config["service"]["pipelines"])
        return pipeline_problems(config)

    def found(text: str, problems: list[str]) -> bool:
        return any(text in problem for problem in problems)

    assert found("'zipkin' is not defined",
                 broken(lambda c, p: p["traces"]["receivers"].append("zipkin")))
    assert found("'batch' is defined but in no pipeline",
                 broken(lambda c, p: p["traces"].update(processors=[])))
    assert found("connector 'spanmetrics' must be",
                 broken(lambda c, p: p["metrics"].update(receivers=["otlp"])))
    assert found("goes traces -> metrics",
                 broken(lambda c, p: p.update(logs=p.pop("metrics"))))
    assert found("lists 'pprof'",
                 broken(lambda c, p: c["service"]["extensions"].append("pprof")))
    assert found("not in service.extensions",
                 broken(lambda c, p: c["service"].update(extensions=[])))
    assert found("unknown signal", broken(lambda c, p: p.update(trace=p.pop("traces"))))
    assert found("no exporters", broken(lambda c, p: p["metrics"].update(exporters=[])))


# ---------------------------------------------------------------------------- compose

def test_docker_compose_config_accepts_the_file() -> None:
    rc, _out, err = _compose_config_output()
    assert rc == 0, f"docker-compose -f docker-compose.yml config exited {rc}:\n{err}"
    assert set(compose_config()["services"]) == SERVICES


# That every published port is on 127.0.0.1 (and no service uses host networking) is checked
# with the rest of the stack's exposure in tests/reliability/test_security.py.


def test_every_image_is_pinned_to_a_release() -> None:
    for name, svc in raw_compose()["services"].items():
        image = svc["image"]
        repository, _, tag = image.partition("@")[0].rpartition(":")
        assert repository and "/" not in tag, f"{name}: image {image!r} has no tag"
        assert tag != "latest" and re.search(r"\d+\.\d+", tag), \
            f"{name}: image {image!r} is not pinned to a version"
        assert "$" not in image, f"{name}: image {image!r} comes from a variable"


def test_health_checks_everywhere_but_where_the_image_cannot_run_one() -> None:
    for name, svc in compose_config()["services"].items():
        check = svc.get("healthcheck")
        if name in NO_HEALTHCHECK:
            assert check is None, f"{name} has a health check now: drop it from NO_HEALTHCHECK"
            continue
        assert check and check.get("test"), f"{name} has no health check"
        assert not check.get("disable"), f"{name}'s health check is disabled"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), check["test"]
    assert set(NO_HEALTHCHECK) <= SERVICES


def test_health_checks_ask_the_ports_the_services_serve() -> None:
    jaeger = load(JAEGER_CONFIG)
    expected = {
        "jaeger": _port(jaeger["extensions"]["healthcheckv2"]["http"]["endpoint"]),
        "prometheus": 9090,
        "grafana": 3000,
    }
    for name, port in expected.items():
        url = next(arg for arg in service(name)["healthcheck"]["test"] if "://" in arg)
        assert _host(url) in ("127.0.0.1", "localhost") and _port(url) == port, (name, url)


def test_depends_on_waits_for_health_where_there_is_one() -> None:
    services = compose_config()["services"]
    for name, svc in services.items():
        depends_on = svc.get("depends_on") or {}
        assert isinstance(depends_on, dict), f"{name}: depends_on without conditions"
        for target, spec in depends_on.items():
            assert target in services, f"{name} depends on unknown {target}"
            expected = ("service_started" if "healthcheck" not in services[target]
                        else "service_healthy")
            assert spec.get("condition") == expected, (name, target, spec)
    assert services["grafana"]["depends_on"].keys() >= {"prometheus", "jaeger"}
    assert "jaeger" in services["otel-collector"]["depends_on"]


def test_state_lives_in_named_volumes() -> None:
    config = compose_config()
    declared = set(config.get("volumes") or {})
    used = set()
    for name in SERVICES:
        for source, _target, _mode in _mounts(name):
            if not source.startswith(("/", ".", "~")):
                assert source in declared, f"{name}: volume {source!r} is not declared"
                used.add(source)
    assert used == declared, f"declared but unused volumes: {declared - used}"
    assert ("prometheus-data", "/prometheus", "rw") in _mounts("prometheus")
    assert ("grafana-data", "/var/lib/grafana", "rw") in _mounts("grafana")


def test_config_files_are_mounted_read_only_where_the_services_read_them() -> None:
    def mounted(name: str, local: Path) -> tuple[str, str]:
        for source, target, mode in _mounts(name):
            if Path(source) == local:
                return target, mode
        raise AssertionError(f"{name} does not mount {local.relative_to(ROOT)}")

    def command_argument(name: str, flag: str) -> str:
        command = service(name)["command"]
        for i, arg in enumerate(command):
            if arg == flag:
                return command[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
        raise AssertionError(f"{name}: no {flag} in {command}")

    for name, local, flag in (("jaeger", JAEGER_CONFIG, "--config"),
                              ("otel-collector", COLLECTOR_CONFIG, "--config"),
                              ("prometheus", PROMETHEUS_CONFIG, "--config.file")):
        target, mode = mounted(name, local)
        assert mode == "ro", f"{name} mounts {local.name} {mode}"
        assert command_argument(name, flag) == target, name
    assert mounted("grafana", GRAFANA_PROVISIONING) == ("/etc/grafana/provisioning", "ro")
    assert mounted("grafana", ROOT / "dashboards")[1] == "ro"


# ---------------------------------------------------------------------------- Grafana

def test_grafana_admin_password_comes_from_the_environment() -> None:
    # (no anonymous admin, auth proxy or open sign-up: tests/reliability/test_security.py)
    env = service("grafana")["environment"]
    raw = raw_compose()["services"]["grafana"]["environment"]
    assert re.fullmatch(r"\$\{GRAFANA_ADMIN_PASSWORD:-[^}]+\}", raw["GF_SECURITY_ADMIN_PASSWORD"])
    assert env["GF_SECURITY_ADMIN_PASSWORD"], "the documented default is empty"


def _datasources() -> dict[str, dict[str, Any]]:
    files = sorted((GRAFANA_PROVISIONING / "datasources").glob("*.y*ml"))
    assert files, "no data source provisioning"
    return {ds["uid"]: ds for f in files for ds in load(f)["datasources"]}


def test_grafana_data_sources_have_the_agreed_uids_and_reach_the_services() -> None:
    datasources = _datasources()
    assert datasources.keys() >= {"prometheus", "jaeger"}
    prometheus, jaeger = datasources["prometheus"], datasources["jaeger"]
    assert prometheus["type"] == "prometheus" and prometheus.get("isDefault") is True
    assert jaeger["type"] == "jaeger"
    assert [uid for uid, ds in datasources.items() if ds.get("isDefault")] == ["prometheus"]
    for ds, name, port in ((prometheus, "prometheus", 9090),
                           (jaeger, "jaeger", _port(load(JAEGER_CONFIG)["extensions"]
                                                    ["jaeger_query"]["http"]["endpoint"]))):
        assert (_host(ds["url"]), _port(ds["url"])) == (name, port), ds["url"]


def test_exemplars_reach_grafana_and_link_to_jaeger() -> None:
    """The latency histogram's exemplars (a traced call's ids) are kept along both paths,
    the app's endpoint and the Collector's, and Grafana opens their traces in Jaeger."""
    assert "--enable-feature=exemplar-storage" in service("prometheus")["command"]
    # the Collector writes OpenMetrics, the one text format with exemplars, from the
    # pipeline that takes the app's OTLP metrics
    collector = load(COLLECTOR_CONFIG)
    assert collector["exporters"]["prometheus"].get("enable_open_metrics") is True
    assert any("otlp" in p["receivers"] and "prometheus" in p["exporters"]
               for name, p in collector["service"]["pipelines"].items()
               if name.split("/")[0] == "metrics")
    # (no job is limited to the classic text format, which drops exemplars)
    for job in _scrape_jobs().values():
        assert "scrape_protocols" not in job
    links = _datasources()["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert links == [{"name": EXEMPLAR_TRACE_LABEL, "datasourceUid": "jaeger"}]


def _spanmetrics_names() -> tuple[str, str]:
    """(calls counter, duration histogram) as Prometheus names them, from the connector."""
    connector = load(COLLECTOR_CONFIG)["connectors"]["spanmetrics"]
    namespace = connector.get("namespace", "traces.span.metrics").replace(".", "_")
    unit = {"ms": "milliseconds", "s": "seconds"}[connector.get("histogram", {})
                                                 .get("unit", "ms")]
    return f"{namespace}_calls_total", f"{namespace}_duration_{unit}"


def test_grafana_traces_to_metrics_queries_the_span_metrics() -> None:
    links = _datasources()["jaeger"]["jsonData"]["tracesToMetrics"]
    assert links["datasourceUid"] == "prometheus"
    calls, duration = _spanmetrics_names()
    queries = [q["query"] for q in links["queries"]]
    assert any(calls + "{" in q for q in queries), queries
    assert any(duration + "_bucket{" in q for q in queries), queries
    # Grafana expands $NAME in provisioning files: its own variables must be written $$.
    for query in queries:
        assert "$$__tags" in query and not re.search(r"(?<!\$)\$(?!\$)", query), query
    dimensions = {d["name"] for d in load(COLLECTOR_CONFIG)["connectors"]["spanmetrics"]
                  .get("dimensions", [])}
    for tag in links["tags"]:
        # every mapped attribute is a label of the span metrics
        assert tag["key"] == "service.name" or tag["key"] in dimensions, tag
        assert tag["value"] == tag["key"].replace(".", "_"), tag


def test_grafana_loads_the_dashboards_folder() -> None:
    files = sorted((GRAFANA_PROVISIONING / "dashboards").glob("*.y*ml"))
    assert files, "no dashboard provider"
    providers = [p for f in files for p in load(f)["providers"]]
    paths = {p["options"]["path"] for p in providers if p["type"] == "file"}
    target, mode = next((t, m) for s, t, m in _mounts("grafana")
                        if Path(s) == ROOT / "dashboards")
    assert paths == {target} == {"/var/lib/grafana/dashboards"} and mode == "ro"


# ---------------------------------------------------------------------------- Prometheus

def test_promtool_accepts_the_prometheus_config() -> None:
    promtool = _tool("promtool", "prometheus")
    result = _run([promtool, "check", "config", str(PROMETHEUS_CONFIG)])
    assert result.returncode == 0, result.stdout + result.stderr


def _scrape_jobs() -> dict[str, dict[str, Any]]:
    return {job["job_name"]: job for job in load(PROMETHEUS_CONFIG)["scrape_configs"]}


def _targets(job: dict[str, Any]) -> list[str]:
    return [t for sc in job.get("static_configs", []) for t in sc["targets"]]


def test_prometheus_scrapes_the_collector_and_the_app_every_five_seconds() -> None:
    config = load(PROMETHEUS_CONFIG)
    assert config["global"]["scrape_interval"] == "5s"
    jobs = _scrape_jobs()
    assert _targets(jobs["adaptive-runtime"]) == ["host.docker.internal:9464"]
    assert "host.docker.internal:host-gateway" in service("prometheus")["extra_hosts"]

    exporter = load(COLLECTOR_CONFIG)["exporters"]["prometheus"]
    otlp_job = jobs["otlp-metrics"]
    assert _targets(otlp_job) == [f"otel-collector:{_port(exporter['endpoint'])}"]
    assert otlp_job.get("honor_labels") is True  # series keep job = service.name
    collector_self = load(COLLECTOR_CONFIG)["service"]["telemetry"]["metrics"]["readers"][0]
    assert _targets(jobs["otel-collector"]) == [
        f"otel-collector:{collector_self['pull']['exporter']['prometheus']['port']}"]
    jaeger_self = load(JAEGER_CONFIG)["service"]["telemetry"]["metrics"]["readers"][0]
    assert _targets(jobs["jaeger"]) == [
        f"jaeger:{jaeger_self['pull']['exporter']['prometheus']['port']}"]
    for name, job in jobs.items():
        for target in _targets(job):
            assert _host(target) in SERVICES | {"localhost", "host.docker.internal"}, \
                (name, target)


# ---------------------------------------------------------------------------- Collector

def test_collector_pipelines_are_wired_to_defined_components() -> None:
    assert pipeline_problems(load(COLLECTOR_CONFIG)) == []


def test_collector_takes_otlp_from_the_app_on_the_published_ports() -> None:
    protocols = load(COLLECTOR_CONFIG)["receivers"]["otlp"]["protocols"]
    published = _published("otel-collector")
    for protocol, port in (("grpc", 4317), ("http", 4318)):
        endpoint = protocols[protocol]["endpoint"]
        assert _port(endpoint) == port and _host(endpoint) == "0.0.0.0", endpoint
        assert published[port] == ("127.0.0.1", port)


def test_collector_sends_traces_to_jaeger_and_span_metrics_to_prometheus() -> None:
    config = load(COLLECTOR_CONFIG)
    jaeger_otlp = load(JAEGER_CONFIG)["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    to_jaeger = [name for name, exporter in config["exporters"].items()
                 if name.split("/")[0] in ("otlp", "otlp_grpc")
                 and exporter["endpoint"] == f"jaeger:{_port(jaeger_otlp)}"]
    assert to_jaeger, "no OTLP exporter to jaeger"
    assert 4317 not in _published("jaeger"), "Jaeger's OTLP port is for the Collector only"
    otlp_traces = _pipelines_with(config, "receivers", "otlp")
    traces = [p for p in otlp_traces if p.startswith("traces")]
    assert traces and all(set(config["service"]["pipelines"][p]["exporters"])
                          >= {to_jaeger[0], "spanmetrics"} for p in traces)
    metrics = [p for p in otlp_traces if p.startswith("metrics")]
    assert metrics, "the app's OTLP metrics have no pipeline"
    for pipeline in set(metrics) | set(_pipelines_with(config, "receivers", "spanmetrics")):
        assert "prometheus" in config["service"]["pipelines"][pipeline]["exporters"], pipeline


def test_collector_replays_the_mounted_telemetry_folder_into_jaeger() -> None:
    config = load(COLLECTOR_CONFIG)
    replay = [name for name in config["receivers"] if name.split("/")[0] == "otlpjsonfile"]
    assert len(replay) == 1
    receiver = config["receivers"][replay[0]]
    assert receiver.get("start_at") == "beginning"  # the default, "end", replays nothing
    folder = next(t for s, t, m in _mounts("otel-collector")
                  if s.endswith("adaptive-runtime-telemetry") and m == "ro")
    assert {Path(p).parent.as_posix() for p in receiver["include"]} == {folder}
    assert f"{folder}/traces.jsonl" in receiver["include"]
    raw_volumes = raw_compose()["services"]["otel-collector"]["volumes"]
    assert any(v.startswith("${ADAPTIVE_RUNTIME_TELEMETRY_DIR:-./adaptive-runtime-telemetry}:")
               for v in raw_volumes), raw_volumes
    for pipeline in _pipelines_with(config, "receivers", replay[0]):
        assert pipeline.startswith("traces")
        assert any(e.split("/")[0] in ("otlp", "otlp_grpc")
                   for e in config["service"]["pipelines"][pipeline]["exporters"])


def test_collector_health_check_is_enabled_and_published() -> None:
    config = load(COLLECTOR_CONFIG)
    assert "health_check" in config["service"]["extensions"]
    port = _port(config["extensions"]["health_check"]["endpoint"])
    assert _published("otel-collector")[port] == ("127.0.0.1", port)


# ---------------------------------------------------------------------------- Jaeger

def test_jaeger_pipelines_are_wired_to_defined_components() -> None:
    assert pipeline_problems(load(JAEGER_CONFIG)) == []


def test_jaeger_storage_names_refer_to_configured_backends() -> None:
    config = load(JAEGER_CONFIG)
    storage = config["extensions"]["jaeger_storage"]
    query = config["extensions"]["jaeger_query"]
    assert query["storage"]["traces"] in storage["backends"]
    assert query["storage"]["metrics"] in storage["metric_backends"]
    for name, exporter in config["exporters"].items():
        if name.split("/")[0] == "jaeger_storage_exporter":
            assert exporter["trace_storage"] in storage["backends"]
    assert _published("jaeger")[16686] == ("127.0.0.1", _port(query["http"]["endpoint"]))


def test_jaeger_monitor_tab_queries_the_span_metrics_prometheus_has() -> None:
    config = load(JAEGER_CONFIG)
    query = config["extensions"]["jaeger_query"]
    backend = config["extensions"]["jaeger_storage"]["metric_backends"][
        query["storage"]["metrics"]]["prometheus"]
    assert (_host(backend["endpoint"]), _port(backend["endpoint"])) == ("prometheus", 9090)
    # Jaeger builds <namespace>_calls[_total] and <namespace>_duration[_<unit>]_bucket
    calls, duration = _spanmetrics_names()
    namespace = backend.get("metric_namespace", "traces_span_metrics")
    unit = {"ms": "milliseconds", "s": "seconds"}[backend.get("latency_unit", "ms")]
    assert backend.get("normalize_calls") is True and backend.get("normalize_duration") is True
    assert (f"{namespace}_calls_total", f"{namespace}_duration_{unit}") == (calls, duration)
